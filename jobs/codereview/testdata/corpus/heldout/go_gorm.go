package repo

import (
	"fmt"

	"gorm.io/gorm"
)

type User struct{ Name string }

func ByName(db *gorm.DB, name string) (User, error) {
	var u User
	err := db.Where("name = '" + name + "'").First(&u).Error // want: sql-injection
	return u, err
}

func ByNameSafe(db *gorm.DB, name string) (User, error) {
	var u User
	err := db.Where("name = ?", name).First(&u).Error
	return u, err
}

func Raw(db *gorm.DB, col string) *gorm.DB {
	return db.Raw(fmt.Sprintf("SELECT %s FROM users", col)) // want: sql-injection
}
